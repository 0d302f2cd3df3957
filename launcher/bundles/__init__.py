"""Signed, attested result bundles (issue 28).

A bundle is a folder: the run files (result.json, spec.json, samples.csv,
mllog.txt, a sweep's sweep.json) under runs/, and statement.dsse.json, an
in-toto Statement v1 in a DSSE envelope signed with the site's Ed25519 key.
keys (keygen, loading) -> files (safe reads and writes) -> statement, dsse ->
recompute (validity from the stored samples) -> bundle (make) -> verify ->
registry (ORAS push/pull) and compare (two centres' runs).
"""
