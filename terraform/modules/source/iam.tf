# The build of each function reads its bundle from this bucket.
resource "google_storage_bucket_iam_member" "reader" {
  for_each = var.reader_members

  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = each.value
}
