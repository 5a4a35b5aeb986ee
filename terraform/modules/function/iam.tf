# Invocation is authorised on the function's Cloud Run service, which gen2
# gives the function's own name. Only the listed callers get run.invoker.
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = var.invoker_members

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this.name
  role     = "roles/run.invoker"
  member   = each.value
}
