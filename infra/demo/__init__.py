"""The fleet demo behind `make demo` (`dcm-status demo`): `run` drives it, `fleet` builds it,
`billing` checks what billing computed against the fleet's known lifecycles."""
