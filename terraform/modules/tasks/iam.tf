# Creating a task that carries an OIDC token for another account needs both
# cloudtasks.tasks.create on the queue and iam.serviceAccounts.actAs on that
# account.
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = var.enqueuer_members

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.replay.name
  role     = "roles/cloudtasks.enqueuer"
  member   = each.value
}

resource "google_service_account_iam_member" "act_as_task_account" {
  for_each = var.enqueuer_members

  service_account_id = var.task_service_account_id
  role               = "roles/iam.serviceAccountUser"
  member             = each.value
}

# Reconcile compares scheduled entries with the queue: list (viewer) and
# remove orphans (taskDeleter).
resource "google_cloud_tasks_queue_iam_member" "viewer" {
  for_each = var.auditor_members

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.replay.name
  role     = "roles/cloudtasks.viewer"
  member   = each.value
}

resource "google_cloud_tasks_queue_iam_member" "task_deleter" {
  for_each = var.auditor_members

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.replay.name
  role     = "roles/cloudtasks.taskDeleter"
  member   = each.value
}
