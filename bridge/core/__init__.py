"""The pure core, by concern: the rules of one Task (:mod:`.task`), of one owned
partition (:mod:`.partition`) and of the whole process (:mod:`.process`), and the
one backoff with jitter every retry uses (:mod:`.backoff`). No IO, no clock, no
Kafka or HTTP client: callers pass the time and the answers in."""
