# The console's service account gets, besides what is granted here:
# - roles/datastore.user, conditioned on the jsdlq database (the firestore
#   module's user_members: Firestore has no narrower binding);
# - roles/cloudtasks.enqueuer on the replay queue and
#   roles/iam.serviceAccountUser on the tasks account (the tasks module's
#   enqueuer_members: an approval or a replay creates a task carrying the
#   tasks account's OIDC token).
# It writes logs to stdout only (Cloud Run collects them), so it needs no
# logging or monitoring role.

# On the replay queue: "replay now" runs a scheduled task at once (RunTask);
# the entry page shows whether the entry's task is in the queue (GetTask).
resource "google_cloud_tasks_queue_iam_member" "queue" {
  for_each = toset(["roles/cloudtasks.taskRunner", "roles/cloudtasks.viewer"])

  project  = var.project_id
  location = var.queue_location
  name     = var.queue_name
  role     = each.key
  member   = google_service_account.console.member
}

moved {
  from = google_cloud_tasks_queue_iam_member.task_runner
  to   = google_cloud_tasks_queue_iam_member.queue["roles/cloudtasks.taskRunner"]
}

moved {
  from = google_cloud_tasks_queue_iam_member.viewer
  to   = google_cloud_tasks_queue_iam_member.queue["roles/cloudtasks.viewer"]
}

# Who may pass IAP to the operator UI: every principal of a console role
# (the console then gives each its role; a principal admitted by IAP but of
# no role would be refused every page).
resource "google_iap_web_cloud_run_service_iam_member" "operator" {
  for_each = setunion(var.viewers, var.operators, var.approvers)

  project                = var.project_id
  location               = var.region
  cloud_run_service_name = google_cloud_run_v2_service.console["ui"].name
  role                   = "roles/iap.httpsResourceAccessor"
  member                 = each.value
}

# IAP calls the UI service with its own service agent's identity token, so
# the agent is the UI's only invoker.
resource "google_cloud_run_v2_service_iam_member" "iap_invoker" {
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.console["ui"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:service-${var.project_number}@gcp-sa-iap.iam.gserviceaccount.com"
}
