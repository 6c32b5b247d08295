"""Who the caller is and what it may do: tokens, RBAC, ServiceAccounts, privilege admission,
reviews, TLS and the control plane's own identities."""
