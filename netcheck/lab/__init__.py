"""Lab code: EMULATION for benchmarks and tests on one machine; never imported by a real
node or coordinator."""
