# State lives in a GCS bucket (versioned, locked by GCS object generations).
# The backend is configured at init time, so one configuration serves every
# environment:
#
#   terraform init -backend-config="bucket=<PROJECT>-tfstate" -backend-config="prefix=dcm-status"
#
# Cloud Build does the same with its _TF_STATE_BUCKET substitution (cloudbuild.yaml).
# For a throwaway local state instead, see docs/deploy.md ("State").
terraform {
  backend "gcs" {}
}
