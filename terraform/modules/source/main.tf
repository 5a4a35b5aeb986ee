# The function source: the repository root zipped and stored under its own
# hash, so any change to the code is a new object and redeploys the
# functions, and an unchanged tree is a no-op.

data "archive_file" "source" {
  type             = "zip"
  source_dir       = var.source_dir
  excludes         = var.excludes
  output_path      = "${var.output_dir}/jsdlq-functions.zip"
  output_file_mode = "0644"
}

resource "google_storage_bucket" "source" {
  project                     = var.project_id
  name                        = var.bucket_name
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy
  labels                      = var.labels

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }
}

resource "google_storage_bucket_object" "source" {
  bucket       = google_storage_bucket.source.name
  name         = "functions/${data.archive_file.source.output_sha256}.zip"
  source       = data.archive_file.source.output_path
  content_type = "application/zip"
}
