output "bucket" {
  description = "Name of the bucket holding the source bundles."
  value       = google_storage_bucket.source.name
}

output "object" {
  description = "Object name of the current bundle (functions/<sha256>.zip)."
  value       = google_storage_bucket_object.source.name
}

output "sha256" {
  description = "SHA-256 of the current bundle; it changes exactly when the bundled source changes."
  value       = data.archive_file.source.output_sha256
}

output "size" {
  description = "Size of the bundle in bytes."
  value       = data.archive_file.source.output_size
}
