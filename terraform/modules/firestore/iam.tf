# Firestore has no per-collection or per-database IAM binding resource, so
# roles/datastore.user is a project binding (listed with its reason in
# terraform/README.md). The condition narrows it to this one database.

resource "google_project_iam_member" "datastore_user" {
  for_each = var.user_members

  project = var.project_id
  role    = "roles/datastore.user"
  member  = each.value

  dynamic "condition" {
    for_each = var.restrict_users_to_database ? [1] : []
    content {
      title       = "jsdlq-firestore-database-only"
      description = "Only the jsdlq Firestore database."
      expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.this.name}\""
    }
  }
}
