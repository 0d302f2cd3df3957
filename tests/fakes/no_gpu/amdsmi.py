"""FAKE amdsmi for a simulated node without GPUs: importing it fails as it does
where the vendor's driver library is missing (tests only)."""
raise ImportError("FAKE amdsmi: no GPU driver on this simulated node")
