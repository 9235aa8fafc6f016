package localkube

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes cfg's server, CA and credentials (client certificate or bearer token) as
// a kubeconfig file at path, for processes such as kubectl and sidecars that talk to a local API
// server.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["local"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "local"}
	c.CurrentContext = "local"
	return clientcmd.WriteToFile(*c, path)
}
