"""SGLang 0.5.23's own Python on the lent GPU machine: bundle build, bootstrap, stubs, stand-ins, replays."""
