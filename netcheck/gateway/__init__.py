"""Several coordinator processes ("gateways") sharing one PostgreSQL database run one
round across all their nodes (docs/gateways.md)."""
