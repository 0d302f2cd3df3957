"""Site handling: site configs, the site's policy, the power-helper settings,
the measurement tier and the trust check for files root reads."""
