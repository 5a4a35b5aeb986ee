# Monitoring resources carry no IAM of their own: the components write logs
# (roles/logging.logWriter, granted at the root) and these metrics, policies
# and the dashboard only read them.
