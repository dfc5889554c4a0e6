"""The pure core of tickwork: session values and the state machine. No I/O here."""
