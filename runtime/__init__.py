"""runtime: the published context, accessors, roles, testing helpers, engine and HTTP control plane."""
