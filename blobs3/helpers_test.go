package blobs3

import "github.com/minio/minio-go/v7"

func minioPut() minio.PutObjectOptions   { return minio.PutObjectOptions{} }
func minioStat() minio.StatObjectOptions { return minio.StatObjectOptions{} }

func minioList(prefix string) minio.ListObjectsOptions {
	return minio.ListObjectsOptions{Prefix: prefix, Recursive: true}
}
