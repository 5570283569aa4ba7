"""The pure core: the Task lifecycle and every rule the engine consults. No IO, no clock, no Kafka or HTTP client."""
