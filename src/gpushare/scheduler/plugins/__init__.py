"""Rules the actions consult, named after KAI's plugins: ``proportion`` (fair-share
division, queue shares, reclaim rules) and ``minruntime``."""
