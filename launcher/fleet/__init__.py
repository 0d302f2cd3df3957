"""Fleet acceptance: every GPU of a set of nodes measured under power caps,
the outliers named, drift tracked (`hpcai-launch fleet ...`)."""
