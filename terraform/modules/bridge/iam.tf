# No invoker bindings: nothing outside Cloud Run calls the bridge (its
# health and metrics endpoints are for the platform's probes), so the
# service stays private. Its own permissions — publish on dlq-events and
# read the NATS credentials — are granted on those resources by the events
# module and the root module.
