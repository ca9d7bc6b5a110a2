"""Board and GPU descriptions (YAML data files), read through :mod:`tandem.boards`."""
