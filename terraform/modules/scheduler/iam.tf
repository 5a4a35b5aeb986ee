# The job needs no binding of its own here: the scheduler account's only
# permission, run.invoker on reconcile, is granted by the reconcile function
# module, and whoever applies this module needs iam.serviceAccounts.actAs on
# that account (see terraform/README.md).
