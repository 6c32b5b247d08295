"""The mutating admission webhook for GPU fractions on kubelet nodes: ``gpushare webhook``."""
