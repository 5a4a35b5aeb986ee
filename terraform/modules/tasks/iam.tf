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
resource "google_cloud_tasks_queue_iam_member" "auditor" {
  for_each = {
    for p in setproduct(keys(var.auditor_members), ["roles/cloudtasks.viewer", "roles/cloudtasks.taskDeleter"]) :
    "${p[0]}/${p[1]}" => { member = var.auditor_members[p[0]], role = p[1] }
  }

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.replay.name
  role     = each.value.role
  member   = each.value.member
}
