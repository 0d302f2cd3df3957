"""Site configs shipped with hpcai (TOML files beside this module)."""
