variable "project_id" {
  description = "Google Cloud project id to deploy into."
  type        = string
}

variable "lanes_project" {
  description = "Project id of the providers' lanes (an existing project)."
  type        = string
}

variable "quota_contact" {
  description = "Email Google may contact about the quota preferences."
  type        = string
}

variable "region" {
  description = "Region of the functions and of the Firestore database (a large Pub/Sub region)."
  type        = string
  default     = "europe-west1"
}
