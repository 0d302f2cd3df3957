"""Apptainer images: names and places (store), building (build), the one
module that talks to Apptainer through spython (apptainer), and the
`hpcai-launch images` commands (cli)."""
