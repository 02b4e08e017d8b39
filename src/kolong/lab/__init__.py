"""kolong's lab: benchmarks (`kolong bench`) and experiments (`kolong experiment`) that measure the library against
its references and check the papers' claims. The library never imports the lab; only the CLI does."""
