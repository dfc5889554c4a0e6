"""A module a session listing's `kind=tests.api.never_imported_by_a_listing:KIND` names: the
API must never import it (tests/api/test_sessions.py)."""

KIND = None
