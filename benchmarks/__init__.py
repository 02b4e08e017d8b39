"""kolong's benchmark diagnostics and GPU runner (not installed with kolong): a package, so that its modules are
imported as `benchmarks.tools.NAME` and never by a bare name an installed package may also use."""
