"""engine.http: the one FastAPI app of the serving runtime, for one process or a replica group."""
