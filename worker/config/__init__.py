"""Configuration: settings from `TICKWORK_*` variables, the store they name, `module:attr`
imports, the release, the masking of secrets, and this process (its lease owner's name and
its background loops)."""
