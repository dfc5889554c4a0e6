"""Observers of the tick's report: metrics, traces and webhooks hang on `report.Observer`;
the tick knows none of them."""
