"""attention: attention backends and SWA pool resolution."""
