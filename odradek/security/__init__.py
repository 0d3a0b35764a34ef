"""Security pieces with no I/O: SCRAM's formulas, ACL matching, principal rules.

The network layer (TLS, SASL exchanges), the metadata layer (credentials and ACLs as
records) and the server (the authorizer, quotas) build on these; this package imports
nothing of odradek's above it.
"""
