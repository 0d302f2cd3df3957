"""Host side of hpcai: the `hpcai-launch` CLI, site configs, runtimes, power
caps and results. Never imports a deep-learning framework.
"""
