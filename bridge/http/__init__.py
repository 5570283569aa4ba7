"""What every HTTP adapter of the bridge shares (the agents' client, the token
endpoint's, the push webhook's JWKS reader): reading what a peer the bridge does
not control sends, under caps and deadlines (:mod:`bridge.http.bounded`)."""
