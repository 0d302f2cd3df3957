"""Live metrics for the monitoring stack (issue 44 §2): `hpcai-launch metrics serve`
(HTTP, Prometheus/OpenMetrics text) and `hpcai-launch metrics textfile DIR` (node_exporter's
textfile collector).

sampler.py   one cached reading of the node: GPUs (hpcai.gpu), node power (hpcai.measure),
             who holds each GPU's limit and the hpcai runs on the node (launcher/power's records)
collector.py the metric families, from one sample per scrape (a custom Collector)
textfile.py  the *.prom file, written atomically, no-follow, in a folder only we can write
cli.py       the click group
"""
