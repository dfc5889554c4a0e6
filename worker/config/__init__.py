"""Configuration: settings from `TICKWORK_*` variables, `module:attr` imports, the release,
and the masking of secrets."""
