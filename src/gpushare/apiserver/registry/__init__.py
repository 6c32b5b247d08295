"""What each resource does on a write: the API's semantics, kinds, CRDs, admission, garbage
collection and the resources with server-side behaviour (pods, services, quotas, CSRs)."""
