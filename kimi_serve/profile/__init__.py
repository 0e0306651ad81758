"""Profiles: the schema, the YAML loader (extends, overlays, breadcrumbs), the SGLang flag table, and the pure
profile -> launch (argv + environment) function. Depends on core only."""
