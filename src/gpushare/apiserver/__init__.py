"""The embedded Kubernetes-compatible API server (see docs/apiserver.md).

Entry point: `gpushare.apiserver.http.server.ApiServer`.
"""
