package seal_test

import "os"

func writeFile(path, text string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func chmod(path string, mode os.FileMode) error { return os.Chmod(path, mode) }
