output "database_name" {
  description = "Firestore database id, \"(default)\"."
  value       = google_firestore_database.this.name
}

output "database_id" {
  description = "Full resource id of the Firestore database."
  value       = google_firestore_database.this.id
}

output "index_ids" {
  description = "Composite index resource ids on failure-log, by purpose."
  value       = { for k, v in google_firestore_index.failure_log : k => v.name }
}

output "ttl_fields" {
  description = "TTL policy resource ids, by collection."
  value       = { for k, v in google_firestore_field.ttl : k => v.name }
}
