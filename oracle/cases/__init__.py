"""Case tables and comparison helpers shared by the tests, the benchmarks and the sweep scripts."""
