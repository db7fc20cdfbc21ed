"""engine.fleet: a fleet of independent servers following one versioned desired config in etcd.

A fleet is a key prefix in an etcd store. Its desired state is one record, a version
number and the post-publish overrides every server of the fleet should run with;
`sgconf fleet set` writes a new version with a compare-and-swap on the previous one.
Every server started with `--fleet NAME --fleet-store etcd://host:port` watches that
record, applies each version through the same path as `POST /config/overrides` (step
or drain, as each field declares; storage through the attach path), and writes back
what it did: ACK with the version it runs, or NACK with the reason, keeping its last
good config. Envoy's xDS works the same way (a `version_info` per push, ACK/NACK with
an error detail); here the store keeps the record, so a server that starts or comes
back catches up by reading it.

Modules: `records` (what the store holds and where), `store` (the etcd client),
`secrets` (references to secrets, never their values), `changes` (operator input to
desired fields), `apply` (one version onto one server), `agent` (the server's watch
loop and link state), `backend` (the HTTP backend that reports the link), `cli`
(`sgconf fleet`).
"""
