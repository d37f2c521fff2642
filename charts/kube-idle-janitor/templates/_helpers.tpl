{{/* The release's full name: the release name when it already says kube-idle-janitor. */}}
{{- define "kij.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kij.agentName" -}}
{{- printf "%s-node-agent" (include "kij.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kij.agentNamespace" -}}
{{- .Values.nodeAgent.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "kij.leaseName" -}}
{{- .Values.janitor.leaseName | default (include "kij.fullname" .) -}}
{{- end -}}

{{/* The recommended labels; call with (dict "ctx" $ "component" "janitor"). */}}
{{- define "kij.labels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: kube-idle-janitor
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* What selectors and pod templates carry: two labels, as in the kustomize base. */}}
{{- define "kij.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kij.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "kij.policiesConfigMap" -}}
{{- .Values.policies.existingConfigMap | default (printf "%s-policies" (include "kij.fullname" .)) -}}
{{- end -}}

{{/*
Objects kept as files (files/): the generated RBAC and admission policies, copies of
manifests/base that a test keeps equal. Their namespace and the janitor's user are the base's;
here they become the release's. Call with (dict "ctx" $ "path" "files/x.yaml" "component" "c").
*/}}
{{- define "kij.fromFile" -}}
{{- $ctx := .ctx -}}
{{- $user := printf "system:serviceaccount:%s:%s" $ctx.Release.Namespace (include "kij.fullname" $ctx) -}}
{{- $text := $ctx.Files.Get .path -}}
{{- $text = $text | replace "system:serviceaccount:kube-idle-janitor:kube-idle-janitor" $user -}}
{{- $text = $text | replace "request.namespace == 'kube-idle-janitor'" (printf "request.namespace == '%s'" $ctx.Release.Namespace) -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $obj := fromYaml $doc -}}
{{- if $obj }}
{{- $labels := merge (include "kij.labels" (dict "ctx" $ctx "component" $.component) | fromYaml) ($obj.metadata.labels | default dict) -}}
{{- $_ := set $obj.metadata "labels" $labels -}}
{{- if $obj.subjects -}}
{{- range $obj.subjects -}}
{{- $_ := set . "namespace" (ternary (include "kij.agentNamespace" $ctx) $ctx.Release.Namespace (hasSuffix "node-agent" .name)) -}}
{{- $_ := set . "name" (ternary (include "kij.agentName" $ctx) (include "kij.fullname" $ctx) (hasSuffix "node-agent" .name)) -}}
{{- end -}}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}
