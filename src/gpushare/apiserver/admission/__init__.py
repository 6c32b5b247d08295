"""Admission the API server runs beyond its own rules: MutatingWebhookConfigurations."""
