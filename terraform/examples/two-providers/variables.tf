variable "project_id" {
  description = "Google Cloud project id to deploy into."
  type        = string
}

variable "region" {
  description = "Region of the functions and of the Firestore database."
  type        = string
  default     = "europe-west1"
}

variable "aws_bridge_member" {
  description = "IAM member of the existing AWS bridge identity allowed to publish AWS status events."
  type        = string
  default     = "serviceAccount:aws-bridge@bridges-project.iam.gserviceaccount.com"
}
