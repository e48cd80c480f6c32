"""The schema registry: schema formats (parsing, compatibility, payload checks)."""
