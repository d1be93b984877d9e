terraform {
  required_version = ">= 1.5.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50" # the release tests/deploy/test_provider_schema.py proves (docs/deploy.md)
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6" # random_bytes: the first webhook signing key (secrets.tf)
    }
  }

  backend "gcs" {}
}
