"""pytest plugin: the `server_args` fixture and marker (filled in with the runtime context)."""
