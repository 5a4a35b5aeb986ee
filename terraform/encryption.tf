# Encryption at rest (README.md, "Encryption"):
#
# - The webhook signing secrets are envelope-encrypted by jsdlq itself
#   (docs/webhooks.md): each secret has a data key of its own, wrapped by a
#   Cloud KMS key (SECRETS_KMS_KEY). Terraform creates that key unless
#   secrets_kms_key_name names one; deliver wraps and unwraps with it (it
#   signs, and seals the clear secrets of endpoints added before), the
#   console only wraps (it seals the secrets of the endpoints tenants add).
# - kms_key_name, when set, is the customer-managed key (CMEK) of the data
#   Google's services keep: the Firestore database, the Pub/Sub topics and
#   the function source bucket. Their service agents encrypt with it; each
#   gets roles/cloudkms.cryptoKeyEncrypterDecrypter on that key alone, and
#   the resources are created only after the grant.

locals {
  # The Google-managed identities that act for the project's services.
  service_agents = {
    pubsub    = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    firestore = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-firestore.iam.gserviceaccount.com"
  }

  # The agents that encrypt with the customer-managed key.
  cmek_members = var.kms_key_name == null ? {} : {
    pubsub    = local.service_agents.pubsub
    firestore = local.service_agents.firestore
    storage   = data.google_storage_project_service_account.gcs[0].member
  }

  secrets_kms_key = var.secrets_kms_key_name != null ? var.secrets_kms_key_name : google_kms_crypto_key.secrets[0].id

  # Who uses the secrets' key, and how.
  secrets_key_users = merge(
    { deliver = { member = google_service_account.component["deliver"].member, role = "roles/cloudkms.cryptoKeyEncrypterDecrypter" } },
    local.console_enabled ? { console = { member = module.console[0].service_account_member, role = "roles/cloudkms.cryptoKeyEncrypter" } } : {},
  )
}

# Cloud Storage's service agent (made on first use by this read).
data "google_storage_project_service_account" "gcs" {
  count = var.kms_key_name == null ? 0 : 1

  project = var.project_id

  depends_on = [google_project_service.enabled]
}

resource "google_kms_crypto_key_iam_member" "cmek" {
  for_each = local.cmek_members

  crypto_key_id = var.kms_key_name
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = each.value

  depends_on = [google_project_service.enabled]
}

# The webhook secrets' key. Cloud KMS never deletes a key ring: after a
# destroy, apply again with the ring imported (README.md). The key follows
# the database: deleted with it (its versions scheduled for destruction,
# restorable for 30 days), kept when the database is kept, so the sealed
# secrets stay readable.
resource "google_kms_key_ring" "secrets" {
  count = var.secrets_kms_key_name == null ? 1 : 0

  project  = var.project_id
  name     = "${var.name_prefix}-secrets"
  location = var.region

  depends_on = [google_project_service.enabled]
}

resource "google_kms_crypto_key" "secrets" {
  count = var.secrets_kms_key_name == null ? 1 : 0

  name            = "webhook-secrets"
  key_ring        = google_kms_key_ring.secrets[0].id
  purpose         = "ENCRYPT_DECRYPT"
  rotation_period = var.secrets_key_rotation_period
  deletion_policy = var.firestore_delete_on_destroy ? "DELETE" : "ABANDON"
  labels          = local.labels
}

resource "google_kms_crypto_key_iam_member" "secrets" {
  for_each = local.secrets_key_users

  crypto_key_id = local.secrets_kms_key
  role          = each.value.role
  member        = each.value.member
}

output "secrets_kms_key" {
  description = "The Cloud KMS key that wraps the webhook secrets' data keys (SECRETS_KMS_KEY; dlqctl webhook add and reseal need it, and roles/cloudkms.cryptoKeyEncrypterDecrypter on it)."
  value       = local.secrets_kms_key
}
