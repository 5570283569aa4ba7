"""The receiving side of A2A push notifications: the webhook every replica serves, and
the relay that puts what it verified in the notifications topic (docs/operating.md,
"Push notifications"; docs/threat-model.md)."""
